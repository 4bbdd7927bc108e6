package guestboot

import (
	"os"
	"os/signal"
	"syscall"
)

func signalNotifyChild(c chan os.Signal) { signal.Notify(c, syscall.SIGCHLD) }
