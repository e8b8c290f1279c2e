"""A job's directory, sent to a server: chosen by ignore rules, stored once by content,
copied for each job that runs from it."""
