"""Sweep launching (the run edge's half that hands jobs to Hydra's launchers): the stoppable submitit
launchers (:mod:`.submitit`; Hydra takes their classes from ``hydra_plugins.speedbench_launchers``) and
job states on Slurm clusters without accounting (:mod:`.slurm_states`)."""
