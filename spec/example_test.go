package spec_test

import (
	"fmt"
	"testing/fstest"

	"github.com/acemq/acemq-flow/spec"
)

func ExampleLoad() {
	fsys := fstest.MapFS{"flows/shop.yaml": {Data: []byte(`version: acemq.flow/v1
name: shop
plugins:
  stock: {command: ./stock}
pipelines:
  - name: fulfilment
    steps:
      - name: reserve
        handler: stok.reserve
`)}}
	_, err := spec.Load(fsys, "flows")
	fmt.Println(err)
	// Output:
	// flows/shop.yaml:9:18: error: step "reserve" uses handler "stok.reserve", but no plugin "stok" is declared in this file; declare it under plugins, or use "stock.reserve"
}
