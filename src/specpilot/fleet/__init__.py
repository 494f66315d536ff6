"""Fleets: one server spec on many hosts behind one SGLang model gateway (`smg`) router."""
