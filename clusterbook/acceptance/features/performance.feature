Feature: Performance targets
  Decode speed and time to first token, measured with a fixed prompt and ignore_eos over several runs;
  the median is reported.

  Scenario: Decode throughput and time to first token meet the targets
    Given the cluster file
    When each tier with targets generates 64 tokens 3 times with the fixed prompt
    Then the median decode throughput is at or above the tier's target
    And the median time to first token is at or below the tier's target
