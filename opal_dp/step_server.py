"""What the multiprocess executor's fork server imports before it forks a process per step
(``defs.shared.executor.MULTIPROCESS``): the job's module and the definitions, built once, so that every step's
process starts with them built instead of building them again (about 1.2 s a step), and the accounting library
that every step composing privacy costs imports (about 1.3 s a step)."""

from importlib import import_module

from opal_dp.core.accounting import LIBRARY
from opal_dp.runs import job_by_name

job_by_name("rollup")  # builds, and caches for the process's settings, the definitions every job resolves from
for module in LIBRARY:
    import_module(module)
