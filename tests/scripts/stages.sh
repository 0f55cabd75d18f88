#!/bin/bash
# A job script in stages, as schedulers run them: preprocessing (exits 0), then the training ($2).
# $1: the Python to run them with.
"$1" "$(dirname "$0")/stage_prep.py"
"$1" "$(dirname "$0")/$2"
