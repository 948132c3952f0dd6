package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// exitError carries a command's exit status: 1 when the input is invalid or
// the operation failed, 2 on usage errors (FLOW-FORMAT §3).
type exitError struct {
	code int
	err  error // already printed when nil
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// failed is a failed operation (exit 1) with a message for stderr.
func failed(format string, args ...any) error {
	return &exitError{code: 1, err: fmt.Errorf(format, args...)}
}

// usage is a usage error (exit 2).
func usage(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// silent1 is exit 1 after the command printed its own result.
var silent1 = &exitError{code: 1}

type streams struct {
	in       io.Reader
	out, err io.Writer
}

// run builds the command tree and runs it with args; it returns the exit
// status. Only main calls os.Exit.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	io := streams{in: stdin, out: stdout, err: stderr}
	root := &cobra.Command{
		Use:           "acemq-flow",
		Short:         "A declarative workflow runtime on RabbitMQ",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage("%v\nsee `%s --help`", err, c.CommandPath())
	})
	root.AddCommand(
		newValidateCmd(io),
		newPlanCmd(io),
		newGraphCmd(io),
	)
	addMoreCommands(root, io)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "acemq-flow: %v\n", ee.err)
		}
		return ee.code
	}
	// Cobra's own errors (unknown command, wrong argument count) are usage.
	fmt.Fprintf(stderr, "acemq-flow: %v\n", err)
	return 2
}
