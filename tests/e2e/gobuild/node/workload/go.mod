// The programs of the real node's test images (pause, bpi, mem, idle); standard library only.
module carico.local/e2e/workload

go 1.26.0
