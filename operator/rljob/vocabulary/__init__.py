"""The words an RLJob is written in, shared by the operator that writes it and the kubectl plugin
that reads it: label and annotation keys, the enums of spec and status, the trainer's phase
names, and the pure readings both make of a diagnosis (the knee's verdict and plot, the
attribution thresholds). One definition of each, standard library only: the rljob-vocabulary
distribution ships this package alone, so the plugin installs without the operator's
dependencies. Nothing is imported here: importing a module imports just it."""
