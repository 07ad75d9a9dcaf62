// Command trainyard-shim is the attempt supervisor alone: the same code as
// "trainyard shim", in a binary that links none of the server, so that the
// start paid once per attempt costs about a millisecond instead of ten.
// The server uses it when it finds it beside its own binary.
package main

import (
	"os"

	"trainyard/internal/executor/local"
)

func main() { os.Exit(local.ShimMain(os.Args[1:])) }
