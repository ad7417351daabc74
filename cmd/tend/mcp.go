package main

import (
	"os"
	"syscall"
)

type mcpCmd struct{}

func (c *mcpCmd) Help() string {
	return `Serves the Model Context Protocol over stdin and stdout, so that an agent
gets tend's control surface as typed tools: start, ls, show, logs (by
offset), cancel, cancel_all, restart, wait, signal, delete, delete_all. Each answers JSON, with an output
schema. The tools are a client of the spool like any other, with the
session of the server's TEND_SESSION: the runs an agent starts are its
session's, ls lists only them, and cancel, cancel_all, restart, signal, delete and delete_all
act only on them (show, logs and wait read any run by its ID: a session is a scope,
not a permission boundary). Every argument is checked as the spool checks
it; a bad one is a tool error, and the server goes on serving. A number
is taken only if it is read exactly (below 2^53 in magnitude), never
rounded to another. At the end
of its input, the server answers every request it read, then exits.
Examples:
  tend mcp          # with TEND_SESSION=agent-1 in its environment
in an MCP client's configuration:
  {"mcpServers": {"tend": {"command": "tend", "args": ["mcp"], "env": {"TEND_SESSION": "agent-1"}}}}`
}

func (c *mcpCmd) Run(e *env) error {
	self := tendProgram()
	path, err := companion("tend-mcp", "the MCP server")
	if err != nil {
		return exitf(exitFailed, "mcp: %v", err)
	}
	argv := []string{"tend-mcp", "--root", e.root, "--tend", self}
	if e.noStart {
		argv = append(argv, "--no-start")
	}
	// Replaced, not run as a child: the agent's client talks to the
	// server, and signals it, directly.
	return exitf(exitFailed, "mcp: %v", syscall.Exec(path, argv, os.Environ()))
}
