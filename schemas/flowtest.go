package schemas

import _ "embed"

// FlowTestSchema is schemas/flowtest.schema.json: the flow test file format
// (`*.flowtest.yaml`, FLOW-FORMAT §7) as JSON Schema 2020-12, for editors.
//
//go:embed flowtest.schema.json
var FlowTestSchema []byte

// FlowTestSchemaURL is the identifier the flow test schema is compiled under.
const FlowTestSchemaURL = "https://acemq.dev/schemas/flowtest.schema.json"
