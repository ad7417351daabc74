package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tendhq/tend/watcher"
)

type watchCmd struct {
	Settle time.Duration `help:"How long a request that does not parse must stay unchanged before it is rejected." default:"1s"`
}

func (c *watchCmd) Help() string {
	return "Example: tend watch    (stop it with Ctrl-C or SIGTERM: its runs are stopped first)"
}

func (c *watchCmd) Run(e *env) error {
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	err := watcher.Run(watcher.Config{Root: e.root, Log: e.stderr, Settle: c.Settle, Stop: stop})
	if errors.Is(err, watcher.ErrRunning) {
		return exitf(exitRefused, "%v", err)
	}
	return err
}
