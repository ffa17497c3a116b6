module strata.dev/gotarget

go 1.19
