Feature: The reasoning tier really uses every worker
  A head that could not reach a worker at start runs on fewer devices without saying so.

  @tier
  Scenario: The head holds a connection to every RPC worker
    Given the cluster file
    Then every RPC tier head has an established connection to each of its workers

  @disruptive
  Scenario: llama.cpp reports layers on every device
    Given the cluster file
    When llama.cpp loads each RPC tier's model once more with its own command line
    Then it reports model buffers on every device of the tier, as the capacity plan places them
