"""The Spark engine: choosing it, generating standalone PySpark jobs, and running them.

The job modules (replay_job, window_job, join_job) and jobentry are what a
generated job runs; a job file carries them whole (jobgen). Only the job
modules import pyspark, and only a job (in its own process) or a test imports
them: the CLI imports the other modules here to decide and to emit jobs. The
window_run, join_run and replay_run modules run a command as its flags ask: they
live here because they choose between the engines (engine), the local one in
streamctl.processing or streamctl.clients, the Spark one the job they generate,
run by runner; diagnostics go to a `say` callback.
"""
