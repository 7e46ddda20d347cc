"""What the multiprocess executor's fork server imports before it forks a process per step
(``defs.shared.executor.MULTIPROCESS``): the job's module and the definitions, built once, so that every step's
process starts with them built instead of building them again (about 1.2 s a step)."""

from opal_dp.runs import job_by_name

job_by_name("rollup")  # builds, and caches for the process's settings, the definitions every job resolves from
