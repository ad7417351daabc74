package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/tendhq/tend/watcher"
)

// checkCmd is a tcp or http health check of another user's run, which
// the watcher runs as that user (watcher.Config.NetCheck): it prints what
// it found, and exits 0 if it passed, 1 if not.
type checkCmd struct {
	TCP     string        `name:"tcp" xor:"target" required:"" help:"Connect to this address (host:port)."`
	HTTP    string        `name:"http" xor:"target" required:"" help:"GET this URL: a 2xx status passes."`
	Timeout time.Duration `default:"5s" help:"How long the check may take."`
}

func (c *checkCmd) Run(e *env) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	ok, detail := watcher.CheckNetwork(ctx, c.TCP, c.HTTP)
	fmt.Println(detail)
	if !ok {
		return exitf(1, "")
	}
	return nil
}
