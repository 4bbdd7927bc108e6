#!/usr/bin/env bash
# Installs the pinned third-party components the tenant control planes run:
#   PostgreSQL 15 and, for real guests, runc, the CNI plugins, iptables, conntrack and a static
#   busybox (Debian packages); and into bin/: kube-apiserver, kube-controller-manager,
#   kube-scheduler, kubectl, kubelet, kube-proxy (from components/go.mod, k8s.io/kubernetes v1.37.2),
#   kube-control-plane (components/cmd/kube-control-plane, the three in one process),
#   kine, kwok, containerd with its runc shim and ctr, and the project's own
#   socialweb-cloud-controller-manager, socialweb-clusterprovider and socialweb-kcp.
# Idempotent: a binary whose pin is unchanged is not rebuilt. One build runs at a time.
# Built binaries are also kept in a cache outside the work tree (SOCIALWEB_COMPONENTS_CACHE,
# default ~/.cache/socialweb-kcp/components) keyed by the pin, so a fresh clone on the same
# machine copies them instead of relinking.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
cache="${SOCIALWEB_COMPONENTS_CACHE:-$HOME/.cache/socialweb-kcp/components}"
mkdir -p "$bin" "$cache"

KUBE_VERSION=v1.37.2
KINE_MODULE=github.com/k3s-io/kine
KINE_VERSION=v0.17.5
KWOK_MODULE=sigs.k8s.io/kwok
KWOK_VERSION=v0.8.0
CONTAINERD_MODULE=github.com/containerd/containerd/v2
CONTAINERD_VERSION=v2.4.2
# Debian packages a real guest needs: runc (the OCI runtime containerd's shim runs), the CNI
# plugins (bridge, host-local, loopback, portmap), what kube-proxy drives (iptables, conntrack)
# and busybox-static, from which the project builds its local test image.
GUEST_PACKAGES="runc containernetworking-plugins iptables conntrack busybox-static"

say() { printf '[install] %s\n' "$*"; }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }

install_postgres() {
  # pg_dump and psql (postgresql-client-15, which postgresql-15 pulls in): backup and restore.
  if [ -x /usr/lib/postgresql/15/bin/postgres ] && [ -x /usr/lib/postgresql/15/bin/initdb ] &&
    [ -x /usr/lib/postgresql/15/bin/pg_dump ] && [ -x /usr/lib/postgresql/15/bin/psql ]; then
    say "postgresql-15: present"
    return
  fi
  local t; t=$(now)
  say "postgresql-15: installing with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql-15 postgresql-client-15 >/dev/null
  # The Debian package starts a system cluster on port 5432; the project never uses it.
  (command -v pg_ctlcluster >/dev/null && pg_ctlcluster 15 main stop) >/dev/null 2>&1 || true
  say "postgresql-15: installed in $(took "$t")"
}

install_guest_packages() {
  local missing=() p
  for p in $GUEST_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "guest packages: present ($GUEST_PACKAGES)"
    return
  fi
  local t; t=$(now)
  say "guest packages: installing ${missing[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
  say "guest packages: installed in $(took "$t")"
}

# build NAME PIN DIR CGO PACKAGE [LDFLAGS] [PREPARE]: builds PACKAGE (run in DIR) into
# bin/NAME unless bin/.NAME.pin already records PIN. PREPARE, a function, is called with DIR
# only when a build is needed, and prints a directory of its own to build in instead, which
# is removed after the build.
build() {
  local name=$1 pin=$2 dir=$3 cgo=$4 pkg=$5 ldflags=${6:-} prepare=${7:-}
  local key; key=$(printf '%s' "$pin" | sha256sum | cut -c1-16)
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.pin" 2>/dev/null)" = "$key" ]; then
    say "$name: up to date ($pin)"
    return
  fi
  local t; t=$(now)
  if [ -x "$cache/$key/$name" ]; then
    say "$name: from cache ($pin)"
  else
    say "$name: building $pkg ($pin)"
    mkdir -p "$cache/$key"
    if [ -n "$prepare" ]; then
      dir=$("$prepare" "$dir")
    fi
    local ok=0
    (cd "$dir" && CGO_ENABLED=$cgo go build -trimpath -tags "${BUILD_TAGS:-}" -ldflags "$ldflags" -o "$cache/$key/$name.tmp" "$pkg") || ok=$?
    [ -z "$prepare" ] || rm -rf "$dir"
    [ "$ok" -eq 0 ] || return "$ok"
    mv "$cache/$key/$name.tmp" "$cache/$key/$name"
  fi
  cp "$cache/$key/$name" "$bin/$name.tmp"
  mv "$bin/$name.tmp" "$bin/$name"
  printf '%s' "$key" > "$bin/.$name.pin"
  say "$name: done in $(took "$t")"
}

install_postgres
install_guest_packages

gov=$(go env GOVERSION)
kpin="kubernetes $KUBE_VERSION $(cat "$root/components/go.mod" "$root/components/go.sum" | sha256sum | cut -c1-16) $gov"
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kldflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
  build "$c" "$kpin" "$root/components" 0 "k8s.io/kubernetes/cmd/$c" "$kldflags"
done
# patched_components DIR: a copy of the components module in DIR (go.mod, go.sum and
# cmd/kube-control-plane) in which each module with patches under DIR/patches/<module path>/
# is replaced by its pinned version's source with those patches applied, in name order.
# Prints the copy's directory, a new one in the cache (two installs at once each build their
# own); removed again when anything fails. A patch that no longer fits the pinned version
# (after an upgrade) fails the install; no hunk is applied with fuzz.
patched_components() {
  local src=$1 work
  work=$(mktemp -d "$cache/kube-control-plane-src.XXXXXX") || return 1
  if ! patch_into "$src" "$work"; then
    rm -rf "$work"
    return 1
  fi
  printf '%s' "$work"
}

# patch_into SRC WORK: patched_components' work. It runs in a command substitution, where
# errexit does not hold, so each step fails the function itself.
patch_into() {
  local src=$1 work=$2 module dir p
  mkdir -p "$work/cmd" && cp "$src/go.mod" "$src/go.sum" "$work/" && cp -r "$src/cmd/kube-control-plane" "$work/cmd/" || return 1
  for module in $(cd "$src" && [ ! -d patches ] || find patches -name '*.patch' -printf '%h\n' | sed 's|^patches/||' | sort -u); do
    dir=$(cd "$src" && go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [ -n "$dir" ] || { echo "install: components/patches/$module: no such module in components/go.mod" >&2; return 1; }
    mkdir -p "$work/patched/$module" && cp -r "$dir/." "$work/patched/$module/" && chmod -R u+w "$work/patched/$module" || return 1
    for p in "$src/patches/$module"/*.patch; do
      say "kube-control-plane: patching $module with ${p#"$src/"}" >&2
      patch -s -p1 --forward --fuzz=0 --no-backup-if-mismatch -d "$work/patched/$module" < "$p" >&2 ||
        { echo "install: ${p#"$src/"} does not apply to $module as pinned: update the patch" >&2; return 1; }
    done
    (cd "$work" && go mod edit -replace "$module=./patched/$module") || return 1
  done
}

# A tenant's control plane in one process: our main over the same pinned Kubernetes packages,
# with the patches in components/patches/ (each says why; ARCHITECTURE.md section 24), for
# this binary only; so its pin is theirs, its own source's and the patches'.
cppin="$kpin $(cd "$root/components" && { cat cmd/kube-control-plane/*.go; [ ! -d patches ] || find patches -name '*.patch' | sort | while read -r p; do echo "$p"; cat "$p"; done; } | sha256sum | cut -c1-16)"
build kube-control-plane "$cppin" "$root/components" 0 ./cmd/kube-control-plane "$kldflags" patched_components

# kine and kwok build from their own modules (go install's @version semantics: their go.mod
# and go.sum, not ours), so their dependencies are the ones their releases were tested with.
# Putting them in components/go.mod would let MVS lift them to Kubernetes's versions.
build_module() {
  local name=$1 module=$2 version=$3 pkg=$4 cgo=$5 ldflags=${6:-}
  local work; work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  local key_pin="$module@$version $gov"
  local key; key=$(printf '%s' "$key_pin" | sha256sum | cut -c1-16)
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.$name.pin" 2>/dev/null)" = "$key" ]; then
    say "$name: up to date ($key_pin)"
    return
  fi
  if [ ! -x "$cache/$key/$name" ]; then
    say "$name: fetching $module@$version"
    local src
    src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    build "$name" "$key_pin" "$src" "$cgo" "$pkg" "$ldflags"
  else
    build "$name" "$key_pin" "$work" "$cgo" "$pkg" "$ldflags"
  fi
}
build_module kine "$KINE_MODULE" "$KINE_VERSION" . 1 "-X github.com/k3s-io/kine/pkg/version.Version=$KINE_VERSION"
build_module kwok "$KWOK_MODULE" "$KWOK_VERSION" ./cmd/kwok 0 "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
# containerd 2.x for real guests (kubelet 1.37 accepts 1.6 only through a fallback 1.38 drops).
# Static, without the snapshotters that need cgo or kernel features this project does not use.
cldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
for c in containerd containerd-shim-runc-v2 ctr; do
  BUILD_TAGS="no_btrfs no_devmapper no_zfs" build_module "$c" "$CONTAINERD_MODULE" "$CONTAINERD_VERSION" "./cmd/$c" 0 "$cldflags"
done

# The project's own binaries: always built (go's build cache makes an unchanged one quick),
# so bin/ never runs a CCM older than the source. Same flags as the Kubernetes builds, so
# the k8s.io packages they share come from the build cache.
for cmd in socialweb-cloud-controller-manager socialweb-clusterprovider socialweb-kcp socialweb-guest socialweb-pause; do
  t=$(now)
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/$cmd.tmp" "./cmd/$cmd")
  mv "$bin/$cmd.tmp" "$bin/$cmd"
  say "$cmd: built in $(took "$t")"
done
# The kubectl plugin: kubectl runs kubectl-kcp for "kubectl kcp ..." (krew's convention,
# the binary's name is the plugin's), so `kubectl kcp up demo` works with bin/ on PATH.
ln -sfn socialweb-kcp "$bin/kubectl-kcp"

"$bin/kube-apiserver" --version
say "all components in $bin"
