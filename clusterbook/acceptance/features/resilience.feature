Feature: Resilience
  Services come back on their own after a node restart or a crashed worker.

  @disruptive
  Scenario: Services are enabled and come back after a node restart
    Given the cluster file
    When the last worker node of the first RPC tier restarts
    Then every service of that node is active again
    And the tier answers a chat completion again within the recovery target, or before its down alert fires where SLURM requeues its job

  @disruptive
  Scenario: A killed RPC worker, then a killed head, are recovered, and no client of the gateway sees an error
    Given the cluster file
    And clients send chat completions through the gateway to every tier behind it
    When an RPC worker of the first RPC tier is killed with SIGKILL
    Then the tier answers a chat completion again within the recovery target
    When then its head is killed with SIGKILL
    Then the tier answers a chat completion again within the recovery target
    And no client request failed meanwhile
