module carico/bench/loadgen

go 1.22
