// Command tend-watch is tend's watcher: `tend watch` and `tend up` run
// it. It is a program of its own so that the other tend calls, which only
// write request files and read state files, start without the watcher's
// code and its cgo (see package daemon).
//
//	tend-watch [--root DIR] watch [--settle D] [--max-running N] ...
package main

import (
	"os"

	"github.com/tendhq/tend/cmd/internal/buildinfo"
	"github.com/tendhq/tend/cmd/internal/daemon"
)

// version is set at build time with -ldflags "-X main.version=...", as
// tend's is.
var version = "dev"

func main() {
	os.Exit(daemon.Main(buildinfo.String(version), os.Args[1:], os.Stderr))
}
