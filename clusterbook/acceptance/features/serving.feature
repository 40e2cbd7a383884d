Feature: Serving
  Every tier answers its API, lists its models, and every model answers its kind's request.

  @tier
  Scenario: Every tier is healthy and lists its models
    Given the cluster file
    Then every tier answers /health with 200
    And every tier lists every model it serves

  @tier
  Scenario: Every model of every tier answers
    Given the cluster file
    Then every model of every tier answers its kind's request within the API response target

  @tier
  Scenario: Every tier answers at the same time, as the plan places them
    Given the cluster file
    Then a request sent to every tier at the same moment is answered by each, unless the plan says the tiers cannot run together

  Scenario: A request without the API key is refused
    Given the cluster file
    Then every tier with an API key answers 401 to a request without it
