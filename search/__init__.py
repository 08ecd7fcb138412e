"""The tuner: a scenario and its space, the study that samples it, the trial executor that
measures each configuration on a server of its own, the trial's typed results and the
confirmation (the command line is `app`, the server's flags and process are `serving`)."""
