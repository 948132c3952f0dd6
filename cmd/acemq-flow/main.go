// Command acemq-flow validates, plans, draws and runs declarative workflows
// on RabbitMQ. See README.md for the commands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	// Zone names resolve from the binary, on a machine or image without
	// a zoneinfo database as well.
	_ "time/tzdata"
)

func main() {
	if err := secretsFromFiles(os.LookupEnv, os.Setenv); err != nil {
		fmt.Fprintf(os.Stderr, "acemq-flow: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
