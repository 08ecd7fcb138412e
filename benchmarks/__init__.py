"""The maintained benchmarks: each is a `make bench-*` target, run as `python -m benchmarks.bench_NAME`
(docs/benchmarks.md says what each answers and how long it takes). One-off experiments, kept to be
run again, are in `benchmarks.experiments` (its README says what each answered and when)."""
