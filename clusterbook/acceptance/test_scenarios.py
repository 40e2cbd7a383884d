"""Bind every feature under features/ to the steps."""

from pytest_bdd import scenarios

scenarios("features")
