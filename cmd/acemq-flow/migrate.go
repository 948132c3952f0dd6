package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storeurl"
)

// defaultStore is the store a command uses without --store or
// ACEMQ_STORE_URL: the embedded SQLite file.
const defaultStore = "sqlite:acemq.db"

func newMigrateCmd(s streams) *cobra.Command {
	var (
		storeURL string
		printSQL bool
	)
	cmd := &cobra.Command{
		Use:   "migrate [--store URL] [--print]",
		Short: "Create or update the store's tables, or print their SQL",
		Long: `Apply the SQL of the store's tables (idempotency and outbox) that the store
does not have yet, and record each file in acemq_migrations. Applying it again
does nothing.

--print writes that SQL to stdout instead, without connecting, for the
migration tool that already owns your schema; applying the printed files
leaves the store as ready as migrate does. ` + "`run`" + ` never creates tables unless
told to (--create-schema, for development).

Environment: ACEMQ_STORE_URL (--store).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			backend, err := storeurl.Backend(storeURL)
			if err != nil {
				return usage("--store: %v", err)
			}
			if printSQL {
				if err := storeurl.WriteMigrations(s.out, storeURL); err != nil {
					return failed("%v", err)
				}
				return nil
			}
			if backend == "memory" {
				fmt.Fprintln(s.out, "the memory store has no tables; nothing to migrate")
				return nil
			}
			set, err := storeurl.Open(cmd.Context(), storeURL, stores.Options{})
			if err != nil {
				return failed("open the store %s: %v", redactStore(storeURL), err)
			}
			defer set.Close()
			if err := set.Migrate(cmd.Context()); err != nil {
				return failed("migrate the store %s: %v", redactStore(storeURL), err)
			}
			ms, err := storeurl.Migrations(storeURL)
			if err != nil {
				return failed("%v", err)
			}
			fmt.Fprintf(s.out, "store %s is up to date (%s, %d migrations, the latest %s)\n",
				redactStore(storeURL), backend, len(ms), ms[len(ms)-1].Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&storeURL, "store", envOr("ACEMQ_STORE_URL", defaultStore), "store: postgres://…, sqlite:PATH or memory: (env ACEMQ_STORE_URL)")
	f.BoolVar(&printSQL, "print", false, "print the SQL instead of applying it")
	return cmd
}
