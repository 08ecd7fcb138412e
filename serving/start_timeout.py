"""How long a vLLM server may take to answer `/health` before its start counts as failed
(`FailureClass.START_TIMEOUT`): the one default of the scenario's `server.startup_timeout_s`,
the launcher's and the executor's."""

DEFAULT_STARTUP_TIMEOUT_S = 300.0
