"""`torch_xla._dynamo.config` on xladev: PyTorch/XLA's bridge options, accepted.

`skip_input_data_check`: xladev checks each compiled graph's inputs cheaply and computes a pending one
first (counted as DynamoSyncInputExecuteTime); setting it changes nothing.
"""

skip_input_data_check = False
