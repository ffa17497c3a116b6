module strata.dev/golabels

go 1.19
