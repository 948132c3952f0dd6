package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/acemq/acemq-flow/runtime/broker"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	root := newRootCmd(streams{in: stdin, out: stdout, err: stderr})
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
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
	// A file or stream that failed (stdout on a full disk) is a failed
	// operation, not a usage error.
	var pe *fs.PathError
	if errors.As(err, &pe) {
		fmt.Fprintf(stderr, "acemq-flow: %v\n", err)
		return 1
	}
	// Cobra's own errors (unknown command, wrong argument count) are usage.
	path := "acemq-flow"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(stderr, "acemq-flow: %v\nsee `%s --help`\n", err, path)
	return 2
}

// newRootCmd builds the command tree, writing to s.
func newRootCmd(s streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "acemq-flow",
		Short:         "A declarative workflow runtime on RabbitMQ",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage("%v\nsee `%s --help`", err, c.CommandPath())
	})
	root.AddCommand(
		newValidateCmd(s),
		newPlanCmd(s),
		newGraphCmd(s),
	)
	addMoreCommands(root, s)
	// Added now rather than at Execute, so that requireSubcommands covers it.
	root.InitDefaultCompletionCmd()
	requireSubcommands(root)
	hideSecretDefaults(root)
	return root
}

// hideSecretDefaults keeps the secrets a flag default takes from the
// environment (ACEMQ_AMQP_URL, ACEMQ_STORE_URL, ACEMQ_MANAGEMENT_URL,
// ACEMQ_ADMIN_TOKEN) out of
// --help, which prints each default. Only the text shown changes.
func hideSecretDefaults(c *cobra.Command) {
	for _, sub := range c.Commands() {
		hideSecretDefaults(sub)
	}
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
		fs.VisitAll(func(f *pflag.Flag) {
			switch {
			case f.Name == "amqp":
				f.DefValue = broker.RedactURLs(f.DefValue)
			case f.Name == "store" || f.Name == "management":
				f.DefValue = redactStore(f.DefValue)
			case f.Name == "admin-token" && f.DefValue != "":
				f.DefValue = "xxxxx"
			}
		})
	}
}

// requireSubcommands makes every command that only groups others (the root,
// consumers) a usage error, exit 2, when run without a subcommand or with
// one it does not know: Cobra would print the help and exit 0, which a
// script takes for success (FLOW-FORMAT §3).
func requireSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommands(sub)
	}
	if !c.HasAvailableSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2 // Cobra's own default, which it sets only on its own path
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			fmt.Fprint(c.ErrOrStderr(), c.UsageString())
			return usage("name a command; see `%s --help`", c.CommandPath())
		}
		hint := "see `" + c.CommandPath() + " --help`"
		if alt := c.SuggestionsFor(args[0]); len(alt) > 0 {
			for i, a := range alt {
				alt[i] = "`" + c.CommandPath() + " " + a + "`"
			}
			hint = "did you mean " + strings.Join(alt, " or ") + "?"
		}
		return usage("unknown command %q for %q; %s", args[0], c.CommandPath(), hint)
	}
}
