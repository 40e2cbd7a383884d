Feature: SLURM tiers and the gateway
  Tiers run as preemptible SLURM jobs (seed 004); nginx follows them through the endpoint registry.

  @tier
  Scenario: Every SLURM tier's job runs, or waits as the plan says, and its endpoint is registered
    Given the cluster file
    Then every SLURM tier has a running job whose registered endpoint answers /health, unless the plan says it waits for a running tier

  @gateway
  Scenario: The gateway reaches each tier by its path
    Given the cluster file
    Then a request through the gateway reaches each tier by its path

  @disruptive
  Scenario: A preempted tier leaves the gateway and comes back on its own
    Given the cluster file
    And clients send chat completions through the gateway to the first single-node SLURM tier
    When a higher-priority job takes the node of the first single-node SLURM tier
    Then the tier's job leaves its node, its endpoint leaves the gateway, and a client is held, then answered or told 503 with Retry-After
    And the tier answers through the gateway again before its down alert fires, on another node
    And no client request failed meanwhile
    And when the higher-priority job ends, every SLURM tier answers through the gateway again on its own

  @disruptive
  Scenario: A cancelled SLURM job is submitted again by the keeper, and no client of the gateway sees an error
    Given the cluster file
    And clients send chat completions through the gateway to every tier behind it
    When the job of every SLURM tier is cancelled with scancel
    Then every SLURM tier's job is pending or running again within two keeper intervals
    And every SLURM tier answers through the gateway again before its down alert fires
    And no client request failed meanwhile

  @disruptive
  Scenario: A killed RPC worker step is started again inside its job, the logs say why, and no client sees an error
    Given the cluster file
    And clients send chat completions through the gateway to every tier behind it
    When an RPC worker step of the first SLURM RPC tier is killed with SIGKILL
    Then every SLURM tier answers through the gateway again within its recovery target
    And the tier's job was restarted as its step_restarts say: inside the job, or requeued when it has none
    And invoke logs for that tier shows the job's state and the worker step's end
    And no client request failed meanwhile
