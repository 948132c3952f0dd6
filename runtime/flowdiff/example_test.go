package flowdiff_test

import (
	"fmt"
	"testing/fstest"

	"github.com/acemq/acemq-flow/runtime/flowdiff"
	"github.com/acemq/acemq-flow/runtime/plan"
	"github.com/acemq/acemq-flow/spec"
)

func side(flow string) flowdiff.Side {
	set, err := spec.Load(fstest.MapFS{"shop.yaml": {Data: []byte(flow)}}, "shop.yaml")
	if err != nil {
		panic(err)
	}
	pl, err := plan.Compile(set.Flows)
	if err != nil {
		panic(err)
	}
	return flowdiff.Side{Flows: set.Flows, Plan: pl}
}

// ExampleCompare finds the step a new version removes, and Settle, told
// that none of its queues holds a message, makes it a warning.
func ExampleCompare() {
	const head = "version: acemq.flow/v1\nname: shop\nplugins:\n  k: {command: ./k}\npipelines:\n  - name: orders\n    steps:\n"
	old := side(head + "      - {name: validate, handler: k.validate}\n      - {name: charge, handler: k.charge}\n")
	newer := side(head + "      - {name: validate, handler: k.validate}\n")

	changes := flowdiff.Compare(old, newer)
	for _, c := range changes {
		fmt.Println(c.Pos, c.Severity(), c.Kind, c.Msg)
	}
	_ = flowdiff.Settle(changes, func(queue string) (int, bool, error) { return 0, true, nil })
	fmt.Println("with every queue empty:", changes[0].Severity(), changes.Breaking())
	// Output:
	// shop.yaml:9:10 error step-removed step "charge" of pipeline "orders" is removed
	// with every queue empty: warning false
}
