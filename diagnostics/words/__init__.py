"""Stage 5, the words: how a figure is said (said), the opening lines every page starts with (opening,
line_one, undecided, next_steps, side_actions), what sits below them (details), the soak to rerun,
and the console summary the CLI prints."""
