package runtime_test

import "testing/fstest"

func testFS(flow string) fstest.MapFS {
	return fstest.MapFS{"f.yaml": {Data: []byte(flow)}}
}
