Feature: Monitoring
  Prometheus watches every node and tier between verify runs; its alerts follow the targets.

  @monitoring
  Scenario: Prometheus scrapes every node exporter and every tier
    Given the cluster file
    Then every node exporter and every RPC tier's server is up in Prometheus

  Scenario: llama-server's token counters advance during a generation
    Given the cluster file
    When the first RPC tier generates 32 tokens
    Then Prometheus sees that tier's generated-token counter grow by at least 32

  Scenario: The tier probe finds every tier healthy and answering within its first-token level
    Given the cluster file
    Then the probe reports every tier healthy, registered and not pending where SLURM runs it
    And each RPC tier's time to first token in Prometheus is within its critical level

  @disruptive
  Scenario: A tier that stays down fires its alert, which resolves once it is back
    Given the cluster file
    When the first RPC tier is stopped until its tier-down alert fires
    Then the probe saw the tier unhealthy while it was down
    And invoke status listed the firing alert while the tier was down
    And the monitoring node's journal had the alert as a line at its severity while the tier was down
    And the site's status banner listed the alert while the tier was down
    And the alert fired once its for window had passed, and resolves after the tier is deployed again
