"""Bind every feature under tests/features to the shared steps."""

from pytest_bdd import scenarios

scenarios("../features")
