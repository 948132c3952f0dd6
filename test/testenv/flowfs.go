package testenv

import "testing/fstest"

// FlowFS is a file system holding one flow file, f.yaml, for spec.Load.
func FlowFS(flow string) fstest.MapFS {
	return fstest.MapFS{"f.yaml": {Data: []byte(flow)}}
}
