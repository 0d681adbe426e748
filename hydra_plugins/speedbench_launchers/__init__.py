"""speedbench's submitit launchers, where Hydra takes launchers from (a launcher's ``_target_``
must be a class of a ``hydra_plugins`` module); the code lives in :mod:`speedbench.launchers`."""
from hydra_plugins.hydra_submitit_launcher import submitit_launcher as plugin

from speedbench.launchers import Stoppable


class LocalLauncher(Stoppable, plugin.LocalLauncher):
    """``hydra/launcher=local``: every job a process of its own on this machine."""


class SlurmLauncher(Stoppable, plugin.SlurmLauncher):
    """``hydra/launcher=slurm``: every job a task of one Slurm array."""
