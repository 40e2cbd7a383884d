"""invoke's tasks file in this checkout: clusterbook's tasks live in the package (clusterbook/adapters/tasks.py), so
`clusterbook TASK` runs the same tasks from any folder once the package is installed. invoke loads this file anew
for each command line: the task list is that line's cluster file's."""

from clusterbook.adapters.command_line import parsed_line
from clusterbook.adapters.tasks import collection

ns, _operations = collection(parsed_line())
