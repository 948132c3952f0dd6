// Package schemas holds the JSON Schema of the flow file format
// (flow.schema.json), embedded so that the binary validates flows with the
// exact schema editors use for completion and hover docs.
package schemas

import _ "embed"

// FlowSchema is schemas/flow.schema.json: the flow file format of
// FLOW-FORMAT §1 as JSON Schema 2020-12.
//
//go:embed flow.schema.json
var FlowSchema []byte

// FlowSchemaURL is the identifier the schema is compiled under.
const FlowSchemaURL = "https://acemq.dev/schemas/flow.schema.json"
