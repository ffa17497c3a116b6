module strata.dev/goversions/dep

go 1.19
