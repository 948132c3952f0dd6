package main

import "github.com/spf13/cobra"

// addMoreCommands registers the commands that need a broker, a database or
// the runtime.
func addMoreCommands(root *cobra.Command, io streams) {
	root.AddCommand(newRunCmd(io), newSendCmd(io), newConsumersCmd(io), newReplayCmd(io), newInspectCmd(io), newDelaysCmd(io))
	root.AddCommand(newMigrateCmd(io), newRelayCmd(io), newOutboxCmd(io), newPurgeCmd(io), newSchedulesCmd(io))
	root.AddCommand(newSagasCmd(io))
	root.AddCommand(newSchemasCmd(io))
	root.AddCommand(newDiffCmd(io))
	root.AddCommand(newTestCmd(io))
	root.AddCommand(newVersionCmd(io))
}
