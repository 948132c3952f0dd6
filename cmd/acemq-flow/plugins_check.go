package main

import (
	"context"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/spec"
)

// checkPlugins starts every plugin the plan names and checks that each
// handler the flows use exists there.
func checkPlugins(ctx context.Context, io streams, plan *runtime.Plan) spec.Diagnostics {
	return nil
}
