//! ESP and AH.
