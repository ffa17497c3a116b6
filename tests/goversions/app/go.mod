module strata.dev/goversions/app

go 1.19

require strata.dev/goversions/dep v0.0.0

// build.sh builds with -modfile copies of this file whose replace points at dep-v1 or dep-v2.
replace strata.dev/goversions/dep => ../dep-v1
