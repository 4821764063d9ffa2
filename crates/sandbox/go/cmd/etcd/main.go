// Command etcd is the etcd server, built from the same pinned module graph as kube-apiserver
// so the sandbox needs nothing beyond the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
