module strata.test/gohot

go 1.19
