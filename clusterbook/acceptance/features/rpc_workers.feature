Feature: RPC workers
  The RPC workers of every RPC tier run (as services, or as steps of the tier's SLURM job) and can only be reached where they should be:
  llama.cpp's RPC has no authentication.

  @tier
  Scenario: Every RPC worker is active and listens on its fabric address only
    Given the cluster file
    Then every RPC worker runs on its node: its unit active and enabled, or its step in the tier's running job
    And every RPC worker listens on its RPC network address and on no other address

  Scenario: The RPC port cannot be reached on a node's other addresses
    Given the cluster file
    Then from each tier head, the RPC port of every worker is closed on the worker's other addresses
    And every worker's firewall table is loaded and drops the RPC port for addresses outside the tier

  Scenario: The RPC network carries the tier's fabric target
    Given the cluster file
    Then iperf3 from the head to each worker over the RPC network reaches the tier's fabric target
