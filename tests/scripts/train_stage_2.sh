#!/bin/bash
# Seed 001 launches its training through a shell script.
echo "stage 2 starting"
python3 "$(dirname "$0")/$1" "${@:2}"
