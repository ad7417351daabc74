// Command tend-mcp serves tend's control surface to agents as MCP tools
// over stdin and stdout; `tend mcp` runs it. It is a program of its own so
// that the MCP SDK, and the net/http it brings, cost nothing to the tend
// calls that do not serve MCP (see package mcpserver).
//
//	tend-mcp [--root DIR] [--tend PATH] [--no-start]
package main

import (
	"os"

	"github.com/tendhq/tend/cmd/internal/buildinfo"
	"github.com/tendhq/tend/cmd/internal/mcpserver"
)

// version is set at build time with -ldflags "-X main.version=...", as
// tend's is.
var version = "dev"

func main() {
	os.Exit(mcpserver.Main(buildinfo.String(version), os.Args[1:], os.Stdin, os.Stderr))
}
