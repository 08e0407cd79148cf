"""`kubectl rljob`: the kubectl plugin. Its views are pure text from an RLJob's JSON; its writes
are annotations a user may set with kubectl itself. A client of the API only: nothing in the
operator imports it."""
