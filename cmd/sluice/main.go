// Command sluice runs change-data-capture pipelines: see README.md.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "version" {
		fmt.Printf("sluice %s\n", version)
		return
	}
	fmt.Fprintln(os.Stderr, "usage: sluice version")
	os.Exit(2)
}
