package main

import (
	"os"
	"os/exec"
	"path/filepath"
)

// tendProgram returns the path of the running tend as it was invoked
// (os.Args[0], looked up on the PATH if it has no slash), else its
// executable: a program a name links to is told by that name (testscript's
// commands are), which os.Executable, resolving links, loses.
func tendProgram() string {
	if p, err := exec.LookPath(os.Args[0]); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	self, _ := os.Executable()
	return self
}

// companion returns the path of name, one of the programs installed with
// tend (tend-watch, tend-mcp, tend-top; what says what it is, for the
// error), beside this tend, and never one on the PATH: tend often runs as
// root with a user's PATH (sudo -E, cron), and must not run what that user
// put there.
func companion(name, what string) (string, error) {
	self := tendProgram()
	path, err := exec.LookPath(filepath.Join(filepath.Dir(self), name))
	if err != nil {
		return "", exitf(exitFailed, "%s, %s, is not beside %s: install it with go install github.com/tendhq/tend/cmd/%s@latest (make install installs it with tend)", name, what, self, name)
	}
	return path, nil
}
