// Command tend-top is tend's live view of a root, on a terminal; `tend
// top` runs it. It is a program of its own so that its terminal library
// (bubbletea, lipgloss) costs nothing to the tend calls that do not show
// it (see package top).
//
//	tend-top [--root DIR] [--session S] [--color auto|always|never]
package main

import (
	"os"

	"github.com/tendhq/tend/cmd/internal/top"
)

func main() {
	os.Exit(top.Main(os.Args[1:], os.Stdout, os.Stderr))
}
