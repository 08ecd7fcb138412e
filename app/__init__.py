"""The application around the tuner: the `autotune` command line (`cli`), what a stored study is
shown as (`outputs`: the summary, report, dashboard, best-config export, live progress) and the
worker fleet that runs one study's trials in parallel processes (`parallel`, `workers`,
`worker_options`). It reads and drives `search`; nothing below imports it."""
