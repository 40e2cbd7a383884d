Feature: Tiers on demand
  A SLURM tier with on_demand gives its GPUs back when it has been idle and starts again on its first request,
  which the gateway holds meanwhile (issue 33). Each scenario first waits for the tier's idle time.

  @disruptive
  Scenario: An idle tier on demand is released, and its first request is answered
    Given the cluster file, its tiers on demand as they are
    When the first tier on demand has had no request for its idle time
    Then its job has left the queue and the wake service calls it released
    And its first request through the gateway is answered, within 25 % of the predicted cold start

  @disruptive
  Scenario: Ten concurrent first requests start one job and are all answered
    Given the cluster file, its tiers on demand as they are
    When the first tier on demand has had no request for its idle time
    Then ten concurrent first requests through the gateway are all answered by one new job

  @disruptive
  Scenario: A request that waits past the cap gets 503 with Retry-After
    Given the cluster file, its tiers on demand as they are
    When the first tier on demand has had no request for its idle time
    And its partition takes no jobs for a while
    Then a request through the gateway gets 503 with Retry-After once the tier's cap has passed
    And once the partition is up again, the tier answers its next request
